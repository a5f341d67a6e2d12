"""``python -m vadapt_lab COMMAND``: the lab's commands (``reproduce``)."""

from __future__ import annotations

import sys

COMMANDS = ("reproduce",)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m vadapt_lab {{{','.join(COMMANDS)}}} [ARGS]", file=sys.stderr)
        return 2
    from vadapt_lab.reproduce import main as reproduce

    return reproduce(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
