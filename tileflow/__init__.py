"""TileFlow: what does this fused dataflow cost on this chip?"""

from tileflow.errors import InputError

__all__ = ["InputError"]
__version__ = "0.1.0"
