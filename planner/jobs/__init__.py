"""Entry files for `spark-submit` that ship inside the package (an installed planner has no spark/ folder)."""
