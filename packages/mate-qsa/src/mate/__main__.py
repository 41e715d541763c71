"""``python -m mate``: the ``mate`` console command."""

from .cli import main

raise SystemExit(main())
