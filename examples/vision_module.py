"""A user's own PyTorch module for the image-classifier example (`vision_app.py`): ResNet-18
(He et al., "Deep Residual Learning for Image Recognition", 2015), written here with the
parameter names torchvision's ``resnet18`` uses, so that a torchvision state dict loads into
it unchanged (``TorchModel(..., weights="resnet18.safetensors")``).

Why not ``torchvision.models.resnet18`` itself: torchvision's wheels are built against one
torch build each, and the one that pairs with the CPU torch this project pins (torchvision
0.28.0) links CUDA libraries, so ``import torchvision`` fails beside a CPU torch. The
architecture is plain PyTorch; nothing here needs torchvision.

`resnet18_seeded()` is the factory the example names: random weights from a fixed seed.
They are untrained (no pretrained image weights are available offline): its scores are
deterministic but meaningless. Imported (with torch) at build time only; serving runs the
exported ONNX graph without torch.
"""

from __future__ import annotations

import torch
from torch import nn

NUM_CLASSES = 1000          # ImageNet-1k's classes, as torchvision's resnet18 head
SEED = 0


def _conv3x3(c_in: int, c_out: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (projected by a 1x1
    convolution when the block changes width or stride)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(c_in, c_out, stride)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(c_out, c_out)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample: nn.Module | None = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(
                nn.Conv2d(c_in, c_out, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.downsample is None else self.downsample(x)
        return self.relu(out + skip)


class ResNet18(nn.Module):
    """(N, 3, H, W) float32 images, normalized -> (N, `num_classes`) logits. Four stages of
    two basic blocks each (widths 64, 128, 256, 512), global average pooling, one linear
    layer."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        widths = (64, 128, 256, 512)
        c_in = 64
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(c_in, width, stride),
                                                         BasicBlock(width, width)))
            c_in = width
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():   # the initialisation torchvision's ResNet uses
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = stage(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18_seeded() -> nn.Module:
    """ResNet-18 with random weights from seed `SEED` (untrained: a stand-in for real
    weights, which `TorchModel(weights=...)` would load)."""
    torch.manual_seed(SEED)
    return ResNet18()
