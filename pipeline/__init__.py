"""gpu-idle: find, explain and price every idle gap on every GPU in Nsight Systems exports.

Stages (one module each, data flows down): discover -> load -> window -> gaps ->
attribution -> cost -> analyse (per GPU row) -> graph (Dask) -> fleet (reduce, writes).
"""
__version__ = "0.1.0"
