"""torchvision's per-sample transforms, in C++ (actorch._C.transforms): Compose, Normalize,
RandomCrop, CenterCrop, Resize, RandomHorizontalFlip, and Lambda over Python code (which runs
under the GIL). Give them to actorch.data.TransformedDataset over a C++ dataset, or call them on
an array."""
from ._C import transforms as _C_transforms

Transform = _C_transforms.Transform
Compose = _C_transforms.Compose
Normalize = _C_transforms.Normalize
RandomCrop = _C_transforms.RandomCrop
CenterCrop = _C_transforms.CenterCrop
Resize = _C_transforms.Resize
RandomHorizontalFlip = _C_transforms.RandomHorizontalFlip
Lambda = _C_transforms.Lambda
