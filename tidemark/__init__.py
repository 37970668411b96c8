"""tidemark's harness: the `tidemark` command, the embedded servers, the producer, migrations and benchmarks.

It drives the pipeline (``spark_jobs``) and never the other way round: nothing in ``spark_jobs`` or
``plugins/`` imports this package.
"""
