#include "transport/raw/esp.h"

#include <openssl/evp.h>

#include <cstring>
#include <memory>

namespace softverbs::transport::raw {
namespace {

const EVP_CIPHER* GcmCipher(size_t key_bytes) {
  switch (key_bytes) {
    case 16: return EVP_aes_128_gcm();
    case 24: return EVP_aes_192_gcm();
    case 32: return EVP_aes_256_gcm();
    default: return nullptr;
  }
}

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

// One GCM pass: `seal` encrypts and writes `tag`, otherwise decrypts and verifies it.
bool Gcm(bool seal, std::span<const uint8_t> key, std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
         std::span<const uint8_t> in, uint8_t* out, uint8_t* tag) {
  const EVP_CIPHER* cipher = GcmCipher(key.size());
  if (cipher == nullptr || nonce.size() != 12) return false;
  CipherCtx ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  if (!ctx) return false;
  auto init = seal ? EVP_EncryptInit_ex : EVP_DecryptInit_ex;
  auto update = seal ? EVP_EncryptUpdate : EVP_DecryptUpdate;
  int n = 0;
  if (init(ctx.get(), cipher, nullptr, nullptr, nullptr) != 1) return false;
  if (EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) != 1) return false;
  if (init(ctx.get(), nullptr, nullptr, key.data(), nonce.data()) != 1) return false;
  if (!aad.empty() && update(ctx.get(), nullptr, &n, aad.data(), static_cast<int>(aad.size())) != 1) return false;
  if (!in.empty() && update(ctx.get(), out, &n, in.data(), static_cast<int>(in.size())) != 1) return false;
  if (seal) {
    if (EVP_EncryptFinal_ex(ctx.get(), out + in.size(), &n) != 1) return false;
    return EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kEspIcvBytes, tag) == 1;
  }
  if (EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kEspIcvBytes, tag) != 1) return false;
  return EVP_DecryptFinal_ex(ctx.get(), out + in.size(), &n) == 1;
}

}  // namespace

bool AesGcmSeal(std::span<const uint8_t> key, std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
                std::span<const uint8_t> in, uint8_t* out, uint8_t tag[kEspIcvBytes]) {
  return Gcm(true, key, nonce, aad, in, out, tag);
}

bool AesGcmOpen(std::span<const uint8_t> key, std::span<const uint8_t> nonce, std::span<const uint8_t> aad,
                std::span<const uint8_t> in, uint8_t* out, const uint8_t tag[kEspIcvBytes]) {
  uint8_t t[kEspIcvBytes];
  memcpy(t, tag, kEspIcvBytes);
  return Gcm(false, key, nonce, aad, in, out, t);
}

size_t EspOffset(std::span<const uint8_t> frame, const fabric::raw::FrameView& view) {
  if (view.ip_version == 0 || view.ip_proto != kIpProtoEsp || view.fragment) return 0;
  // IPv4: the header's own length (IHL); IPv6: the fixed header (no extension headers parsed).
  const size_t l3 = view.l3_offset;
  const size_t header = view.ip_version == 4 ? size_t(frame[l3] & 0x0f) * 4 : 40;
  const size_t esp = l3 + header;
  if (esp + kEspHeaderBytes > view.ip_end) return 0;
  return esp;
}

void EspSa::SetEsnHigh(uint32_t esn_high) {
  std::lock_guard lock(mu_);
  esn_high_ = esn_high;
}

uint32_t EspSa::esn_high() const {
  std::lock_guard lock(mu_);
  return esn_high_;
}

bool EspSa::Locate(std::span<const uint8_t> frame, Layout* out) {
  fabric::raw::FrameView view;
  if (!fabric::raw::ParseFrame(frame, &view)) return false;
  const size_t esp = EspOffset(frame, view);
  if (esp == 0) return false;
  // The text holds at least the trailer's pad length and next header (RFC 4303 section 2.4).
  const size_t text = esp + kEspHeaderBytes + kEspIvBytes;
  if (view.ip_end < text + 2 + kEspIcvBytes) return false;
  out->esp = esp;
  out->text = text;
  out->icv = view.ip_end - kEspIcvBytes;
  out->text_len = out->icv - text;
  return true;
}

size_t EspSa::Aad(const uint8_t* esp, uint8_t aad[12]) const {
  if (!esn_) {
    memcpy(aad, esp, 8);
    return 8;
  }
  // RFC 4106 section 5: SPI, then the 64-bit extended sequence number, high half first.
  const uint32_t high_be = __builtin_bswap32(esn_high());
  memcpy(aad, esp, 4);
  memcpy(aad + 4, &high_be, 4);
  memcpy(aad + 8, esp + 4, 4);
  return 12;
}

bool EspSa::EncryptFrame(std::span<uint8_t> frame) const {
  Layout l;
  if (!Locate(frame, &l)) return false;
  uint8_t* esp = frame.data() + l.esp;
  // IV algorithm SEQ: the 64-bit sequence number (big-endian), XOR the SA's iv.
  uint32_t seq_be;
  memcpy(&seq_be, esp + 4, 4);
  const uint64_t seq64 = (uint64_t(esn_ ? esn_high() : 0) << 32) | __builtin_bswap32(seq_be);
  uint8_t* iv = esp + kEspHeaderBytes;
  for (int i = 0; i < 8; ++i) iv[i] = uint8_t(seq64 >> (56 - 8 * i)) ^ keymat_.iv[i];
  uint8_t nonce[12], aad[12];
  memcpy(nonce, keymat_.salt, 4);
  memcpy(nonce + 4, iv, 8);
  const size_t aad_len = Aad(esp, aad);
  std::vector<uint8_t> plain(frame.begin() + l.text, frame.begin() + l.text + l.text_len);
  return AesGcmSeal(keymat_.key, nonce, {aad, aad_len}, plain, frame.data() + l.text, frame.data() + l.icv);
}

bool EspSa::DecryptFrame(std::span<uint8_t> frame) const {
  Layout l;
  if (!Locate(frame, &l)) return false;
  const uint8_t* esp = frame.data() + l.esp;
  uint8_t nonce[12], aad[12];
  memcpy(nonce, keymat_.salt, 4);
  memcpy(nonce + 4, esp + kEspHeaderBytes, 8);
  const size_t aad_len = Aad(esp, aad);
  std::vector<uint8_t> plain(l.text_len);
  if (!AesGcmOpen(keymat_.key, nonce, {aad, aad_len}, {frame.data() + l.text, l.text_len}, plain.data(),
                  frame.data() + l.icv))
    return false;
  memcpy(frame.data() + l.text, plain.data(), l.text_len);
  return true;
}

}  // namespace softverbs::transport::raw
