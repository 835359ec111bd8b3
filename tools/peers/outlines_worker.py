"""Child process that builds outlines-core indexes, so a slow build can be abandoned.

Protocol over stdin/stdout, one pickle per message: the parent first sends the pickled
`Vocabulary` and the child answers "ready"; then each request is a regex string and each reply is
`("ok", pickled_index, build_seconds)` or `("error", message)`.
Run only by `outlines_peer.IndexBuilder` (which sets `RAYON_NUM_THREADS=1`).
"""

import pickle
import sys
import time

from outlines_core import Index


def main() -> None:
    """Serve index builds until the parent closes stdin."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    vocabulary = pickle.load(requests)
    pickle.dump("ready", replies)
    replies.flush()
    while True:
        try:
            regex = pickle.load(requests)
        except EOFError:
            return
        start = time.perf_counter()
        try:
            index = Index(regex, vocabulary)
            reply = ("ok", pickle.dumps(index), time.perf_counter() - start)
        except Exception as exc:  # any failure is a compile failure for the parent to report
            reply = ("error", f"{type(exc).__name__}: {exc}")
        pickle.dump(reply, replies)
        replies.flush()


if __name__ == "__main__":
    main()
