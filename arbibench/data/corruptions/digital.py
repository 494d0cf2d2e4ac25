"""Digital corruptions: brightness, contrast, elastic transform, pixelation and JPEG compression."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from arbibench.data.corruptions import params
from arbibench.data.corruptions.filters import gaussian_blur, sample_bilinear, to_uint8


def rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """[..., 3] RGB in [0, 1] to HSV in [0, 1] (hexcone model; hue 0 and saturation 0 for greys)."""
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    v = rgb.max(-1)
    delta = v - rgb.min(-1)
    safe = np.where(delta == 0, 1.0, delta)
    s = np.where(delta == 0, 0.0, delta / np.where(v == 0, 1.0, v))
    h = np.where(r == v, (g - b) / safe, 0.0)
    h = np.where(g == v, 2.0 + (b - r) / safe, h)  # a tie goes to the later channel, as scikit-image does
    h = np.where(b == v, 4.0 + (r - g) / safe, h)
    h = np.where(delta == 0, 0.0, (h / 6.0) % 1.0)
    return np.stack([h, s, v], axis=-1)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """The inverse of :func:`rgb_to_hsv`."""
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    sector = np.floor(h * 6.0)
    f = h * 6.0 - sector
    sector = sector.astype(np.int64) % 6
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.zeros(hsv.shape)
    for k, (cr, cg, cb) in enumerate(choices):
        sel = sector == k
        out[..., 0] = np.where(sel, cr, out[..., 0])
        out[..., 1] = np.where(sel, cg, out[..., 1])
        out[..., 2] = np.where(sel, cb, out[..., 2])
    return out


def brightness(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """The HSV value raised by c (clipped to 1): hue and saturation stay, the image gets lighter."""
    c = params.at(params.BRIGHTNESS, severity)
    hsv = rgb_to_hsv(x / 255.0)
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
    return to_uint8(np.clip(hsv_to_rgb(hsv), 0, 1) * 255)


def contrast(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Every channel pulled towards its own mean over the image by the factor c."""
    c = params.at(params.CONTRAST, severity)
    v = x / 255.0
    means = v.mean(axis=(1, 2), keepdims=True)
    return to_uint8(np.clip((v - means) * c + means, 0, 1) * 255)


def _affine_from_points(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """[N, 2, 3] matrices mapping the three (x, y) points ``src`` [3, 2] onto ``dst`` [N, 3, 2]."""
    a = np.concatenate([src, np.ones((3, 1))], axis=1)  # [3, 3]
    result: np.ndarray = np.linalg.solve(a[None], dst).transpose(0, 2, 1)  # [N, 3, 2] -> [N, 2, 3]
    return result


def elastic_transform(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """A random affine warp (three control points jittered by up to ``jitter`` pixels), then a smooth random
    displacement field (uniform noise blurred by ``sigma``, times ``alpha``), both read with bilinear weights."""
    alpha, sigma, jitter = params.at(params.ELASTIC_TRANSFORM, severity)
    v = (x / 255.0).astype(np.float32).astype(np.float64)
    n, h, w = v.shape[:3]
    centre = np.array([w // 2, h // 2], dtype=np.float64)
    half = min(h, w) // 3
    src = np.array([centre + half, [centre[0] + half, centre[1] - half], centre - half])
    dst = src[None] + rng.uniform(-jitter, jitter, size=(n, 3, 2))
    m = _affine_from_points(src, dst)
    lin, shift = m[:, :, :2], m[:, :, 2]
    inv = np.linalg.inv(lin)
    cols, rows = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    pts = np.stack([cols, rows], axis=-1)[None] - shift[:, None, None, :]  # destination pixel minus translation
    back = np.einsum("nij,nhwj->nhwi", inv, pts)  # where each destination pixel comes from
    v = sample_bilinear(v, back[..., 1], back[..., 0], "reflect101")
    dx = gaussian_blur(rng.uniform(-1, 1, size=(n, h, w)), sigma, "symmetric", truncate=3) * alpha
    dy = gaussian_blur(rng.uniform(-1, 1, size=(n, h, w)), sigma, "symmetric", truncate=3) * alpha
    out = sample_bilinear(v, rows[None] + dy, cols[None] + dx, "symmetric")
    return to_uint8(np.clip(out, 0, 1) * 255)


def pixelate(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Box-downscaled to ``int(32 c)`` pixels and box-upscaled back (Pillow's BOX filter both ways)."""
    c = params.at(params.PIXELATE, severity)
    h, w = x.shape[1:3]
    small = (int(w * c), int(h * c))
    return np.stack([
        np.asarray(Image.fromarray(img).resize(small, Image.Resampling.BOX).resize((w, h), Image.Resampling.BOX))
        for img in x
    ])


def jpeg_compression(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Saved as JPEG at quality c with Pillow and decoded again."""
    quality = params.at(params.JPEG_COMPRESSION, severity)
    out = []
    for img in x:
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=quality)
        buf.seek(0)
        with Image.open(buf) as decoded:
            out.append(np.asarray(decoded.convert("RGB")))
    return np.stack(out)
