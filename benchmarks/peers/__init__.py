"""Benchmark jobs, one per framework, all run the same way: a subprocess configured by BENCH_* variables
that processes BENCH_COUNT records of BENCH_TOPIC and writes {"seconds", "cpu", "records"} to BENCH_OUT."""
