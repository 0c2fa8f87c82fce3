"""``python -m hami_web`` is the ``hami-web`` command."""

from hami_web.cli import main

raise SystemExit(main())
