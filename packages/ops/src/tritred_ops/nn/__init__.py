from .activation import LogSoftmax as LogSoftmax
from .activation import Softmax as Softmax
from .loss import CrossEntropyLoss as CrossEntropyLoss
from .normalization import BatchNorm1d as BatchNorm1d
from .normalization import BatchNorm2d as BatchNorm2d
from .normalization import BatchNorm3d as BatchNorm3d
from .normalization import LayerNorm as LayerNorm
from .normalization import RMSNorm as RMSNorm
