// ESP inline crypto of a raw port (ibv_create_flow_action_esp(3)), done in software with
// OpenSSL's AES-GCM, as mlx5's inline IPsec offload does it in the NIC: the program builds the
// whole ESP packet -- IP header (protocol 50), ESP header (SPI, sequence number), 8 bytes for the
// IV, the payload, the ESP trailer (padding, pad length, next header) and 16 bytes for the ICV --
// and the device only encrypts and authenticates it (egress) or checks and decrypts it (ingress).
//
// RFC 4106 (AES-GCM in ESP): nonce = salt (4 bytes) || IV (8 bytes); AAD = SPI || sequence
// number, or SPI || ESN high 32 bits || sequence number with extended sequence numbers (RFC 4106
// section 5, RFC 4303 section 2.2.1); the ICV is the 16-byte GCM tag. IV algorithm SEQ: the IV
// the device writes is the 64-bit sequence number (ESN high bits || the header's 32 bits) XOR the
// keymat's `iv` (a per-SA value, as Linux's seqiv generator XORs its salt).
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "fabric/raw/frame.h"

namespace softverbs::transport::raw {

inline constexpr uint8_t kIpProtoEsp = 50;
inline constexpr size_t kEspHeaderBytes = 8;  // SPI, sequence number
inline constexpr size_t kEspIvBytes = 8;
inline constexpr size_t kEspIcvBytes = 16;

// AES-GCM over `in` (plaintext or ciphertext, same length as `out`). Seal writes `tag`;
// Open checks it and returns false (nothing trusted in `out`) when it does not verify.
// `key`: 16, 24 or 32 bytes; `nonce`: 12 bytes.
bool AesGcmSeal(std::span<const uint8_t> key, std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
                std::span<const uint8_t> in, uint8_t* out, uint8_t tag[kEspIcvBytes]);
bool AesGcmOpen(std::span<const uint8_t> key, std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
                std::span<const uint8_t> in, uint8_t* out, const uint8_t tag[kEspIcvBytes]);

// Where a frame's ESP header starts (0: the frame is not an unfragmented IPv4/IPv6 packet of
// protocol 50 holding at least the ESP header).
size_t EspOffset(std::span<const uint8_t> frame, const fabric::raw::FrameView& view);

// One security association: the keying material of an ESP flow action.
class EspSa {
 public:
  struct Keymat {
    std::vector<uint8_t> key;  // 16 or 32 bytes (AES-128 / AES-256)
    uint8_t salt[4] = {};      // as the keymat's u32 lies in memory
    uint8_t iv[8] = {};        // as the keymat's u64 lies in memory
  };
  EspSa(Keymat keymat, bool encrypt, bool esn, uint32_t esn_high)
      : keymat_(std::move(keymat)), encrypt_(encrypt), esn_(esn), esn_high_(esn_high) {}

  bool encrypt() const { return encrypt_; }
  // ibv_modify_flow_action_esp: the ESN's high 32 bits (RFC 4303 section 2.2.1).
  void SetEsnHigh(uint32_t esn_high);
  uint32_t esn_high() const;

  // Egress: writes the IV, encrypts the payload and trailer and writes the ICV, in place.
  // False (frame unchanged) when it is not an ESP packet with room for IV, trailer and ICV.
  bool EncryptFrame(std::span<uint8_t> frame) const;
  // Ingress: checks the ICV and decrypts in place. False when the frame is not an ESP packet
  // with room for IV, trailer and ICV, or the ICV does not verify (frame then unchanged).
  bool DecryptFrame(std::span<uint8_t> frame) const;

 private:
  // The ESP packet's parts: [esp, esp+16) header and IV, then the text up to the ICV.
  struct Layout {
    size_t esp = 0, text = 0, text_len = 0, icv = 0;
  };
  static bool Locate(std::span<const uint8_t> frame, Layout* out);
  // AAD (8 or 12 bytes) from the ESP header; its length.
  size_t Aad(const uint8_t* esp, uint8_t aad[12]) const;

  const Keymat keymat_;
  const bool encrypt_, esn_;
  mutable std::mutex mu_;
  uint32_t esn_high_;
};

}  // namespace softverbs::transport::raw
