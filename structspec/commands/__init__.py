"""The ``structspec`` command line: one module per sub-command (``extract``, ``generate``,
``serve``, ``convert``, ``lint``) and the options they share (``options``, ``progress``).

Its one job is turning arguments into calls of the library and errors into exit codes.

May import: every package below it (``server``, ``generation``, ``models``, ``masks``, ...).
"""
