"""Pillow: a 4000x4000 RGB image (4 bytes a pixel: 64,000,000 bytes, 61.0 MiB,
in blocks of 16 MiB, native, kept: its truth), resized,
filtered and written as PNG in memory."""
import io
import zlib

from PIL import Image, ImageFilter

big = Image.new("RGB", (4000, 4000), (10, 20, 30))  # @truth 61.0
big.load()
small = big.resize((800, 800)).filter(ImageFilter.GaussianBlur(2))
out = io.BytesIO()
small.save(out, format="PNG")
print(big.size, small.getpixel((5, 5)), len(out.getvalue()) > 0, zlib.crc32(small.tobytes()))
