"""Reports: figures and tables as data (figures.py), drawn with matplotlib and plotly, and the HTML page."""

from .figures import Figure, Heat, Panel, Table, Trace

__all__ = ["Figure", "Heat", "Panel", "Table", "Trace"]
