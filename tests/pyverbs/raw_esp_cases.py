"""ESP flow actions on RAW_PACKET QPs (issue 13): run by test_raw_esp.py inside a user + network
namespace of its own (`unshare -rn`), over the veth pair raw_cases.py makes there.

A QP on sva sends a plaintext ESP packet (the program writes the ESP header, room for the IV,
the payload, the trailer and room for the ICV, as for mlx5's inline crypto); an egress rule with
an ENCRYPT action encrypts it on its way out; a sniffer on svb sees it on the wire as ESP with
the SPI and sequence number, the IV the device wrote and no plaintext; an ingress rule with a
DECRYPT action on svb delivers it decrypted, byte for byte. Not collected by discovery on its own.
"""
import ctypes
import os
import struct
import unittest

import raw_cases as rc
from raw_cases import B, CFlowBase, FlowAttrC, _vctx_op, log_lines, udp4_frame
import pyverbs.enums as e
import raw

vp = ctypes.c_void_p
EINVAL, EBUSY, EOPNOTSUPP = 22, 16, 95
IBV_FLOW_SPEC_ESP, IBV_FLOW_SPEC_ACTION_HANDLE = 0x34, 0x1002
IBV_FLOW_ATTR_FLAGS_EGRESS = 1 << 2
ESP_FLAGS_ENCRYPT = 1 << 2
SPI, SEQ = 0x00c0ffee, 41
KEY = bytes(range(0x10, 0x30))  # AES-256
SALT, IV = b'\xca\xfe\xba\xbe', bytes(range(1, 9))


class EspFilterC(ctypes.Structure):
    _fields_ = [('spi', ctypes.c_uint32), ('seq', ctypes.c_uint32)]


class EspSpecC(ctypes.Structure):
    _fields_ = [('type', ctypes.c_int), ('size', ctypes.c_uint16), ('val', EspFilterC), ('mask', EspFilterC)]


class HandleSpecC(ctypes.Structure):
    _fields_ = [('type', ctypes.c_int), ('size', ctypes.c_uint16), ('action', vp)]


class EspAttrsC(ctypes.Structure):  # struct ib_uverbs_flow_action_esp
    _fields_ = [('spi', ctypes.c_uint32), ('seq', ctypes.c_uint32), ('tfc_pad', ctypes.c_uint32),
                ('flags', ctypes.c_uint32), ('hard_limit_pkts', ctypes.c_uint64)]


class KeymatC(ctypes.Structure):  # struct ib_uverbs_flow_action_esp_keymat_aes_gcm
    _fields_ = [('iv', ctypes.c_uint64), ('iv_algo', ctypes.c_uint32), ('salt', ctypes.c_uint32),
                ('icv_len', ctypes.c_uint32), ('key_len', ctypes.c_uint32), ('aes_key', ctypes.c_uint8 * 32)]


class EspActionAttrC(ctypes.Structure):  # struct ibv_flow_action_esp_attr
    _fields_ = [('esp_attr', ctypes.POINTER(EspAttrsC)), ('keymat_proto', ctypes.c_int), ('keymat_len', ctypes.c_uint16),
                ('keymat_ptr', vp), ('replay_proto', ctypes.c_int), ('replay_len', ctypes.c_uint16),
                ('replay_ptr', vp), ('esp_encap', vp), ('comp_mask', ctypes.c_uint32), ('esn', ctypes.c_uint32)]


class Mlx5EspC(ctypes.Structure):  # struct mlx5dv_flow_action_esp
    _fields_ = [('comp_mask', ctypes.c_uint64), ('action_flags', ctypes.c_uint32)]


MLX5_ESP_MASK_FLAGS, MLX5_REQUIRE_METADATA = 1 << 0, 1 << 0


def esp_packet(dst_mac, src_mac, payload, spi=SPI, seq=SEQ):
    """Ethernet / IPv4 (protocol 50) / ESP header / 8 zero bytes for the IV / payload and trailer
    (padding 1, 2, ...; pad length; next header 17) / 16 zero bytes for the ICV."""
    pad = (-(len(payload) + 2)) % 4
    text = payload + bytes(range(1, pad + 1)) + bytes([pad, 17])
    esp = struct.pack('!II', spi, seq) + bytes(8) + text + bytes(16)
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(esp), 1, 0x4000, 64, 50, 0,
                     bytes([10, 66, 0, 1]), bytes([10, 66, 0, 2]))
    ip = ip[:10] + struct.pack('!H', 0xffff ^ rc.csum(ip)) + ip[12:]
    return dst_mac + src_mac + b'\x08\x00' + ip + esp


class EspBase(CFlowBase):
    """The receiving C QP on svb (CFlowBase) and the sending pyverbs QP on sva, with their
    contexts' flow action ops."""

    def setUp(self):
        super().setUp()
        self.tx_qp = raw.pyverbs_pointer(self.sender.qp, 52, self.sender.qp.qp_num)  # ibv_qp.qp_num
        self.tx_ctx = ctypes.c_void_p.from_address(self.tx_qp).value
        self.actions = []  # (destroy op, action), destroyed after the flows

    def tearDown(self):
        for f in reversed(self.cflows):
            self._destroy_flow(f)
        self.cflows = []
        for destroy, a in reversed(self.actions):
            destroy(a)
        super().tearDown()

    def ops(self, ctx):
        return (_vctx_op(ctx, 224, vp, [vp, vp]), _vctx_op(ctx, 240, ctypes.c_int, [vp, vp]),
                _vctx_op(ctx, 232, ctypes.c_int, [vp]), _vctx_op(ctx, 80, vp, [vp, vp]))

    def action(self, ctx, flags, expect=0, key=KEY, keymat_proto=0, mlx5=None, **keymat):
        """An ESP action; mlx5=(comp_mask, action_flags) makes it with mlx5dv_create_flow_action_esp."""
        create, _, destroy, _ = self.ops(ctx)
        if mlx5 is not None:
            dv = ctypes.CDLL('libmlx5.so.1', use_errno=True).mlx5dv_create_flow_action_esp
            dv.restype, dv.argtypes = vp, [vp, vp, vp]
            self._mlx5 = Mlx5EspC(*mlx5)
            create = lambda c, a: dv(c, a, ctypes.byref(self._mlx5))  # noqa: E731
        self._esp = EspAttrsC(flags=flags)
        k = KeymatC(iv=int.from_bytes(IV, 'little'), salt=int.from_bytes(SALT, 'little'), icv_len=16,
                    key_len=len(key), **keymat)
        for i, b in enumerate(key[:32]):
            k.aes_key[i] = b
        self._keymat = k
        attr = EspActionAttrC(esp_attr=ctypes.pointer(self._esp), keymat_proto=keymat_proto,
                              keymat_len=ctypes.sizeof(k), keymat_ptr=ctypes.cast(ctypes.pointer(k), vp))
        a = create(ctx, ctypes.byref(attr))
        if expect:
            self.assertFalse(a)
            self.assertEqual(ctypes.get_errno(), expect)
            return None
        self.assertTrue(a, os.strerror(ctypes.get_errno()))
        self.actions.append((destroy, a))
        return a

    def cflow(self, ctx, qp, specs, flags=0, expect=0):
        body = b''.join(bytes(s) for s in specs)
        head = FlowAttrC(type=e.IBV_FLOW_ATTR_NORMAL, size=ctypes.sizeof(FlowAttrC) + len(body),
                         num_of_specs=len(specs), port=1, flags=flags)
        blob = ctypes.create_string_buffer(bytes(head) + body)
        f = self.ops(ctx)[3](qp, blob)
        if expect:
            self.assertFalse(f)
            self.assertEqual(ctypes.get_errno(), expect)
            return None
        self.assertTrue(f, os.strerror(ctypes.get_errno()))
        self.cflows.append(f)  # CFlowBase destroys these through the receiver's context: same library op
        return f

    @staticmethod
    def esp_spec(spi=SPI, seq_mask=0):
        return EspSpecC(type=IBV_FLOW_SPEC_ESP, size=ctypes.sizeof(EspSpecC),
                        val=EspFilterC(socket_u32(spi), 0), mask=EspFilterC(0xffffffff, seq_mask))

    @staticmethod
    def handle(a):
        return HandleSpecC(type=IBV_FLOW_SPEC_ACTION_HANDLE, size=ctypes.sizeof(HandleSpecC), action=a)


def socket_u32(v):
    """A 32-bit value in network order, as the u32 the C struct holds."""
    return int.from_bytes(struct.pack('!I', v), 'little')


class EspTest(EspBase):
    def test_encrypted_on_the_wire_and_decrypted_byte_exact(self):
        # The sender's action through mlx5dv_create_flow_action_esp (action_flags 0): the same action.
        enc = self.action(self.tx_ctx, ESP_FLAGS_ENCRYPT, mlx5=(MLX5_ESP_MASK_FLAGS, 0))
        dec = self.action(self.c.ctx, 0)
        self.cflow(self.tx_ctx, self.tx_qp, [self.esp_spec(), self.handle(enc)], flags=IBV_FLOW_ATTR_FLAGS_EGRESS)
        self.cflow(self.c.ctx, self.qp, [self.eth(), self.esp_spec(), self.handle(dec)])
        sniffer = rc.RawQp(self.ctx, self.pd, B)  # the frame as the wire carries it
        sniffer.post_recv(4)
        sniffer.flow(flow_type=e.IBV_FLOW_ATTR_SNIFFER)
        payload = b'secret payload of softverbs ' * 3
        plain = esp_packet(self.mac_b, self.sender.mac, payload)
        self.sender.send(plain)
        self.assertEqual([w['status'] for w in self.sender.poll(1)], [e.IBV_WC_SUCCESS])
        got = self.poll_tags(1)
        self.assertEqual([(w, s) for w, s, _ in got], [(0, e.IBV_WC_SUCCESS)])
        wire = [sniffer.received(w) for w in sniffer.poll(1)]
        self.assertEqual(len(wire), 1)
        wire = wire[0]
        # On the wire: IPv4 protocol 50, the SPI and sequence number as written, the IV the device
        # wrote (the 64-bit sequence number XOR the keymat's iv), and no plaintext.
        self.assertEqual(wire[:42], plain[:42])
        self.assertEqual(wire[23], 50)
        self.assertEqual(struct.unpack('!II', wire[34:42]), (SPI, SEQ))
        iv = bytes(a ^ b for a, b in zip(struct.pack('!Q', SEQ), IV))
        self.assertEqual(wire[42:50], iv)
        self.assertNotIn(b'secret', wire)
        self.assertNotEqual(wire[-16:], bytes(16))  # the ICV
        try:  # an independent AES-GCM where the machine has one (RFC 4106: salt || IV, AAD SPI || seq)
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            text = AESGCM(KEY).decrypt(SALT + iv, wire[50:], wire[34:42])
            self.assertEqual(text, plain[50:-16])
        except ImportError:
            pass
        # Delivered decrypted: the frame byte for byte (its IV and ICV as on the wire).
        delivered = bytes(self.buf[:len(plain)])
        self.assertEqual(delivered, plain[:42] + iv + plain[50:-16] + wire[-16:])

    def test_failed_authentication_is_not_delivered(self):
        dec = self.action(self.c.ctx, 0)
        self.cflow(self.c.ctx, self.qp, [self.eth(), self.handle(dec)])  # every frame to svb's MAC
        # No egress rule: the packet leaves with a zero ICV, which does not verify.
        self.sender.send(esp_packet(self.mac_b, self.sender.mac, b'forged'))
        self.assertEqual(self.poll_tags(1, timeout=0.5), [])
        self.assertRegex(log_lines(), r'ESP frame of \d+ bytes failed authentication \(ICV\)')
        # A frame that is not ESP has nothing to decrypt: the same rule delivers it as it is.
        frame = udp4_frame(self.mac_b, self.sender.mac, b'plain')
        self.sender.send(frame)
        self.assertEqual([(w, s) for w, s, _ in self.poll_tags(1)], [(0, e.IBV_WC_SUCCESS)])
        self.assertEqual(bytes(self.buf[:len(frame)]), frame)

    def test_bad_input(self):
        # An unknown keymat type, a key of no AES length, AES-192, an SPI in the action (mlx5: the
        # program writes the header) -> as uverbs + mlx5.
        self.action(self.c.ctx, 0, keymat_proto=1, expect=EOPNOTSUPP)
        self.action(self.c.ctx, 0, key=KEY[:20], expect=EINVAL)
        self.action(self.c.ctx, 0, key=KEY[:24], expect=EOPNOTSUPP)
        dec = self.action(self.c.ctx, 0)
        enc = self.action(self.c.ctx, ESP_FLAGS_ENCRYPT)
        # mlx5dv_create_flow_action_esp: mlx5's EOPNOTSUPP for unknown comp_mask / action_flags;
        # REQUIRE_METADATA (the 0x8CE4 metadata header) is not offered.
        self.action(self.c.ctx, 0, mlx5=(1 << 1, 0), expect=EOPNOTSUPP)
        self.action(self.c.ctx, 0, mlx5=(MLX5_ESP_MASK_FLAGS, 1 << 1), expect=EOPNOTSUPP)
        self.action(self.c.ctx, 0, mlx5=(MLX5_ESP_MASK_FLAGS, MLX5_REQUIRE_METADATA), expect=EOPNOTSUPP)
        # An action on a QP that is not RAW_PACKET; of another context; an egress ESP rule without
        # an SPI; a sequence number mask.
        rc_qp = self.c.create_qp(self.cpd, self.cqx, e.IBV_QPT_RC)
        self.cflow(self.c.ctx, rc_qp, [self.esp_spec(), self.handle(dec)], expect=EINVAL)
        self.cflow(self.tx_ctx, self.tx_qp, [self.esp_spec(), self.handle(enc)], flags=IBV_FLOW_ATTR_FLAGS_EGRESS,
                   expect=EINVAL)
        # The rule's direction decides, not the action's ENCRYPT flag (mlx5_ib parse_flow_flow_action):
        # an ENCRYPT action on an ingress rule is accepted (it decrypts).
        self.assertEqual(self.destroy_flow(self.cflow(self.c.ctx, self.qp, [self.esp_spec(), self.handle(enc)])), 0)
        self.cflow(self.c.ctx, self.qp, [self.eth(), self.handle(enc)], flags=IBV_FLOW_ATTR_FLAGS_EGRESS, expect=EINVAL)
        self.cflow(self.c.ctx, self.qp, [self.esp_spec(seq_mask=1)], expect=EOPNOTSUPP)
        # Destroy while a flow uses it: EBUSY; modify of what mlx5 cannot change: EOPNOTSUPP.
        f = self.cflow(self.c.ctx, self.qp, [self.eth(), self.esp_spec(), self.handle(dec)])
        _, modify, destroy, _ = self.ops(self.c.ctx)
        self.assertEqual(destroy(dec), EBUSY)
        k = KeymatC(icv_len=16, key_len=16)
        attr = EspActionAttrC(keymat_len=ctypes.sizeof(k), keymat_ptr=ctypes.cast(ctypes.pointer(k), vp))
        self.assertEqual(modify(dec, ctypes.byref(attr)), EOPNOTSUPP)
        self.assertEqual(self.destroy_flow(f), 0)
        self.assertEqual(destroy(dec), 0)
        self.actions = [(d, a) for d, a in self.actions if a != dec]
        log = log_lines()
        self.assertRegex(log, r'ibv_create_flow_action_esp\(softverbs0\): keymat_proto 1 is not')
        self.assertRegex(log, r'ibv_create_flow_action_esp\(softverbs0\): key_len 20 is not an AES key length')
        self.assertRegex(log, r'mlx5dv_create_flow_action_esp\(softverbs0\): MLX5DV_FLOW_ACTION_FLAGS_REQUIRE_METADATA')
        self.assertRegex(log, r'ibv_create_flow\(qp 0x[0-9a-f]+\): flow rules attach to RAW_PACKET')
        self.assertRegex(log, r'ibv_create_flow\(qp 0x[0-9a-f]+\): the flow action belongs to another context')
        self.assertRegex(log, r'ibv_destroy_flow_action\(flow_action 0x[0-9a-f]+\): a flow uses the action')
        self.assertRegex(log, r'ibv_modify_flow_action_esp\(flow_action 0x[0-9a-f]+\): the keymat cannot change')
