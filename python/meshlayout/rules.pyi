from typing import Iterable, Optional

from meshlayout import DeviceMesh, LayoutMap

__all__ = ["convert", "layout_map"]

def convert(text: str, from_dialect: str, to_dialect: str, *, names: Optional[str] = ...,
            family: str = ..., tp_axis: str = ..., mesh: Optional[DeviceMesh] = ...,
            layer_indices: Iterable[int] = ..., source: str = ...) -> str: ...
def layout_map(text: str, dialect: str, mesh: Optional[DeviceMesh] = ..., *, names: str = ...,
               family: str = ..., tp_axis: str = ..., source: str = ...) -> LayoutMap: ...
