"""``structspec serve``: an OpenAI-compatible HTTP API over one loaded model.

Modules: :mod:`~structspec.server.app` (routes), :mod:`~structspec.server.protocol` (request
bodies), :mod:`~structspec.server.body` (reading them within limits),
:mod:`~structspec.server.openai_format` (replies and the event stream),
:mod:`~structspec.server.limits`, :mod:`~structspec.server.constraints` (grammar cache),
:mod:`~structspec.server.compile_pool` (compiling in child processes),
:mod:`~structspec.server.collector` (garbage-collector pauses),
:mod:`~structspec.server.engine` (the model behind the routes), :mod:`~structspec.server.worker`
(one generation at a time), :mod:`~structspec.server.errors` and
:mod:`~structspec.server.handlers` (the error format). FastAPI and Starlette are imported only
by ``app``, ``handlers``, ``body`` and ``openai_format``, so the rest (and ``structspec serve
--help``) loads without the ``server`` extra.

May import: ``structspec.generation``, ``structspec.models`` and everything below them; never
``structspec.commands``.
"""
