"""torchvision's transforms, in C++ (actorch._C.transforms), with torchvision 0.14's names,
arguments and defaults: Compose, ToTensor, Normalize, Resize, CenterCrop, RandomCrop,
RandomResizedCrop, RandomHorizontalFlip, RandomVerticalFlip, ColorJitter, Grayscale, and Lambda
over Python code (which runs under the GIL).

Called on a PIL image, a transform takes torchvision's PIL path (the same pixels as torchvision
gives, see docs/python.md, "Images", for the tolerances) and returns a PIL image, or the tensor ToTensor makes;
on an array or a tensor, the tensor path. Given to actorch.data.ImageFolder or ImageFiles they
run on the decoded images in the loader's workers without the GIL; given to TransformedDataset,
on a C++ dataset's tensors. Random draws come from the batch's generator (the loader's seed),
not from torch's global one."""
from .._C import transforms as _C_transforms
from . import functional  # noqa: F401

Transform = _C_transforms.Transform
Compose = _C_transforms.Compose
ToTensor = _C_transforms.ToTensor
Normalize = _C_transforms.Normalize
Resize = _C_transforms.Resize
CenterCrop = _C_transforms.CenterCrop
RandomCrop = _C_transforms.RandomCrop
RandomResizedCrop = _C_transforms.RandomResizedCrop
RandomHorizontalFlip = _C_transforms.RandomHorizontalFlip
RandomVerticalFlip = _C_transforms.RandomVerticalFlip
ColorJitter = _C_transforms.ColorJitter
Grayscale = _C_transforms.Grayscale
Lambda = _C_transforms.Lambda


class InterpolationMode:
    """torchvision's InterpolationMode names (torchvision's own enum is accepted too)."""
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"
