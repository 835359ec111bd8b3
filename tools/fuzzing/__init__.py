"""The fuzzer's parts (``tools/fuzz.py`` runs them): strategies for the cases, the in-process
targets and the worker process that runs them under a time limit, and the HTTP target."""
