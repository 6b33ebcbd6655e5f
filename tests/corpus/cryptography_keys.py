"""cryptography (OpenSSL through Rust): AES-GCM, a hash, Ed25519 signatures."""
import hashlib

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

key = bytes(range(32))
aes = AESGCM(key)
data = bytes(i % 251 for i in range(1 << 20))
sealed = aes.encrypt(b"0" * 12, data, b"header")
assert aes.decrypt(b"0" * 12, sealed, b"header") == data
h = hashes.Hash(hashes.SHA256())
h.update(sealed)
signer = Ed25519PrivateKey.from_private_bytes(bytes(32))
sig = signer.sign(data)
signer.public_key().verify(sig, data)
print(len(sealed), h.finalize().hex()[:16], hashlib.sha256(sealed).hexdigest()[:16], len(sig))
