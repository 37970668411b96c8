"""tidemark's harness: the `tidemark` command, the embedded servers, the producer and migrations
(the benchmarks, ``benchmarks/``, use it from the checkout).

It drives the pipeline (``spark_jobs``) and never the other way round: nothing in ``spark_jobs`` or
``plugins/`` imports this package.
"""
