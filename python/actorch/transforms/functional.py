"""torchvision.transforms.functional on PIL images, in C++: the operations the transforms make,
for use with fixed parameters (and for checks against torchvision's). Each takes and returns a
PIL image (mode RGB or L; other modes are converted to RGB first), except to_tensor."""
from .._C import transforms as _C_transforms

_F = _C_transforms.functional

crop = _F.crop
center_crop = _F.center_crop
resize = _F.resize
resized_crop = _F.resized_crop
hflip = _F.hflip
vflip = _F.vflip
pad = _F.pad
adjust_brightness = _F.adjust_brightness
adjust_contrast = _F.adjust_contrast
adjust_saturation = _F.adjust_saturation
adjust_hue = _F.adjust_hue
rgb_to_grayscale = _F.rgb_to_grayscale
to_tensor = _F.to_tensor
random_resized_crop_params = _F.random_resized_crop_params
