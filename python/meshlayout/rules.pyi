from typing import Iterable, List, Optional, Tuple

from meshlayout import DeviceMesh, LayoutMap

__all__ = ["check", "convert", "diff", "layout_map", "suggest"]

def convert(text: str, from_dialect: str, to_dialect: str, *, names: Optional[str] = ...,
            family: Optional[str] = ..., tp_axis: str = ..., mesh: Optional[DeviceMesh] = ...,
            layer_indices: Iterable[int] = ..., model: Optional[str] = ...,
            source: str = ...) -> str: ...
def layout_map(text: str, dialect: str, mesh: Optional[DeviceMesh] = ..., *, names: str = ...,
               family: Optional[str] = ..., tp_axis: str = ..., model: Optional[str] = ...,
               source: str = ...) -> LayoutMap: ...
def suggest(model: str, mesh: DeviceMesh, *, strategy: str = ..., min_bytes: int = ...,
            family: Optional[str] = ..., model_axis: str = ...,
            data_axes: Iterable[str] = ...) -> str: ...
def check(model: str, text: str, *, dialect: str = ..., min_bytes: int = ...,
          mesh: Optional[DeviceMesh] = ..., family: Optional[str] = ..., tp_axis: str = ...,
          source: str = ...) -> List[str]: ...
def diff(model: str, a: str, b: str, *, from_a: str = ..., from_b: str = ...,
         mesh: Optional[DeviceMesh] = ..., family: Optional[str] = ...,
         tp_axis: str = ...) -> List[Tuple[str, Tuple[int, ...], str, str]]: ...
