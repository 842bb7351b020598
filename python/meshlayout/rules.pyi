from typing import Iterable, Optional

from meshlayout import DeviceMesh, LayoutMap

__all__ = ["convert", "layout_map"]

def convert(text: str, from_dialect: str, to_dialect: str, *, names: Optional[str] = ...,
            family: Optional[str] = ..., tp_axis: str = ..., mesh: Optional[DeviceMesh] = ...,
            layer_indices: Iterable[int] = ..., model: Optional[str] = ...,
            source: str = ...) -> str: ...
def layout_map(text: str, dialect: str, mesh: Optional[DeviceMesh] = ..., *, names: str = ...,
               family: Optional[str] = ..., tp_axis: str = ..., model: Optional[str] = ...,
               source: str = ...) -> LayoutMap: ...
