"""One export -> tidy arrays: :func:`~.report.load_report` (SQLite -> :class:`~pipeline.model.Report`),
:func:`~.report.gpu_trace` (one GPU's cut), :mod:`.cache` (the columnar Parquet cache of loaded exports)."""
