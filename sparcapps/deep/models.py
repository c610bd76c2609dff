"""Models of the deep-learning apps, sized by ``width`` (and ``depth``) for the benchmarks.

No batch normalization: its running statistics are per-rank buffers that data-parallel training
does not average; :class:`ResNetCifar` uses group normalization instead. No dropout, so that a
resumed run replays exactly.

=====================  ====================  ==============================================
model                  input                 parameters (approximately)
=====================  ====================  ==============================================
DigitsCNN(w, depth)    (B, 1, 8, 8)          ``512 w^2 + 18 w^2 (depth - 1)`` (w=16: 140k,
                                             w=100: 5.4M)
ResNetCifar(w, depth)  (B, 3, 32, 32)        ``~ 8 * 9 w^2 * 21 * depth / 3`` (w=16: 0.2M)
SeqLSTM(w, depth)      (B, 8, 8)             ``4 (8 w + w^2) + 8 w^2 (depth - 1)``
WordLM(vocab, w, d)    (T, B) token ids      ``2 vocab w + 8 w^2 d``
=====================  ====================  ==============================================
"""

from __future__ import annotations

import torch
from torch import nn

from .usage import ModelOptionsError

__all__ = ["DigitsCNN", "ResNetCifar", "SeqLSTM", "WordLM", "count_parameters"]


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class DigitsCNN(nn.Module):
    """Conv(1->w) ReLU Conv(w->2w) ReLU [Conv(2w->2w) ReLU]*(depth-2) MaxPool FC(32w->16w)
    ReLU FC(16w->10), on 8x8 images. Output: (B, 10) logits."""

    def __init__(self, width: int = 16, depth: int = 2, classes: int = 10):
        super().__init__()
        if width < 1 or depth < 2:
            raise ModelOptionsError(f"the digits CNN needs --width >= 1 and --depth >= 2, got "
                                    f"{width}, {depth}")
        layers = [nn.Conv2d(1, width, 3, padding=1), nn.ReLU(),
                  nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU()]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU()]
        layers += [nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * width, 16 * width), nn.ReLU(),
                   nn.Linear(16 * width, classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        if x.dim() == 3:
            x = x.unsqueeze(1)
        return self.net(x)


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(min(8, cout), cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(min(8, cout), cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.GroupNorm(min(8, cout), cout))

    def forward(self, x):
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(out + (x if self.skip is None else self.skip(x)))


class ResNetCifar(nn.Module):
    """A ResNet for 32x32 images: stem conv(3->w), three stages of ``depth`` basic blocks of
    width w, 2w, 4w (stride 2 between stages), global average pooling, FC(4w->10).
    ``depth=1`` is a ResNet-8, ``depth=3`` a ResNet-20 (with group norm)."""

    def __init__(self, width: int = 16, depth: int = 1, classes: int = 10):
        super().__init__()
        if width < 1 or depth < 1:
            raise ModelOptionsError(f"the CIFAR-10 ResNet needs --width, --depth >= 1, got "
                                    f"{width}, {depth}")
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.GroupNorm(min(8, width), width), nn.ReLU())
        blocks, cin = [], width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(depth):
                blocks.append(_Block(cin, cout, 2 if stage > 0 and i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


class SeqLSTM(nn.Module):
    """LSTM classifier of sequences (B, T, features): ``depth`` layers of ``width`` hidden
    units, FC on the last step's hidden state. Output: (B, classes) logits."""

    def __init__(self, width: int = 64, depth: int = 1, features: int = 8, classes: int = 10):
        super().__init__()
        self.lstm = nn.LSTM(features, width, num_layers=depth, batch_first=True)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class WordLM(nn.Module):
    """Word-level LSTM language model: embedding(vocab, w), ``depth`` LSTM layers of w units,
    FC(w -> vocab). ``forward(tokens (T, B), state) -> (logits (T, B, vocab), state)``."""

    def __init__(self, vocab: int, width: int = 200, depth: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, num_layers=depth)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens, state=None):
        out, state = self.lstm(self.embed(tokens), state)
        return self.head(out), state
