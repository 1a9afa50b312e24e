"""An image classifier from a user's own PyTorch module: ResNet-18 (`vision_module.py`)
through `fw.TorchModel`, fed base64 images, answering the top 5 classes.

    floodway build examples/vision_app.py
    floodway serve examples/vision_app.py
    curl -s -X POST http://127.0.0.1:8000/v1/classify_image -H 'Content-Type: application/json' \
         -d "{\"inputs\": [\"$(base64 -w0 photo.jpg)\"]}"
    # {"outputs": [[{"label": 238, "score": 0.03...}, ... 5 entries]]}   (random weights)

THE WEIGHTS ARE RANDOM. `vision_module.resnet18_seeded` builds ResNet-18 from a fixed seed:
no pretrained image weights are available offline, so the classes it answers mean nothing
(and labels are ImageNet class indices, 0-999). Give real weights with
``fw.TorchModel(..., weights="resnet18.safetensors")`` (a torchvision ResNet-18 state dict
fits the module as it is).

floodway imports the factory at build time only (with torch), snapshots its state dict to
safetensors, exports ONNX with a dynamic batch axis, checks parity against PyTorch and
serves the graph without torch. The endpoint function does the preprocessing itself, with
numpy and Pillow: resize the shorter side to 256, center-crop 224, scale to [0, 1],
normalize with ImageNet's mean and std (what torchvision's ResNet weights were trained with).
"""

import numpy as np
import PIL.Image

import floodway as fw
from floodway.deploy import to_modal
from floodway.modal.app.images import default_build_image

RESIZE, CROP = 256, 224
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)    # ImageNet's, per RGB channel
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
TOP_K = 5

endpoints = fw.App("floodway-vision")


def preprocess(images: list[PIL.Image.Image]) -> np.ndarray:
    """RGB images of any size -> float32 (N, 3, 224, 224): the shorter side resized to 256
    (bilinear), the center 224x224 cropped, scaled to [0, 1] and normalized."""
    out = np.empty((len(images), 3, CROP, CROP), dtype=np.float32)
    for i, img in enumerate(images):
        w, h = img.size
        scale = RESIZE / min(w, h)
        w, h = max(CROP, round(w * scale)), max(CROP, round(h * scale))
        img = img.convert("RGB").resize((w, h), PIL.Image.BILINEAR)
        left, top = (w - CROP) // 2, (h - CROP) // 2
        img = img.crop((left, top, left + CROP, top + CROP))
        pixels = np.asarray(img, dtype=np.float32) / 255.0             # (224, 224, 3)
        out[i] = ((pixels - MEAN) / STD).transpose(2, 0, 1)
    return out


def top_k(logits: np.ndarray, k: int = TOP_K) -> list[list[dict]]:
    """(N, classes) logits -> per row, the k most likely ``{"label": index, "score":
    softmax probability}``, most likely first."""
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    best = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    return [[{"label": int(j), "score": float(row[j])} for j in idx]
            for row, idx in zip(probs, best, strict=True)]


@endpoints.endpoint(
    model=fw.TorchModel(
        "examples.vision_module:resnet18_seeded",
        inputs=[fw.TensorSpec("pixel_values", "float32", (None, 3, CROP, CROP))],
        outputs=["logits"]),
    build=fw.Build(onnx=True, tensorrt=True, max_batch_rows=16),
    gpu="L4",
    warm=fw.WarmPool(min_containers=1, scaledown_window_s=120, max_containers=4),
    route=fw.Route(max_inflight_per_container=4, max_queue=32, timeout_s=5.0),
    batching=fw.Batching(max_batch_rows=16, wait_ms=5),
)
def classify_image(model: fw.Loaded, images: list[fw.Image]) -> list[list[dict]]:
    """N images -> N lists of the top 5 ``{"label": class index, "score": probability}``."""
    logits = model.run({"pixel_values": preprocess(images)})["logits"]   # (N, 1000)
    return top_k(logits)


# `floodway build --on-modal` imports the factory in the build function: its package goes
# into the build image (the default one holds floodway only).
app = to_modal(endpoints, build_image=default_build_image(gpu=True, serving_gpu=True)
               .add_local_python_source("examples"))
