from pyrometer.cli import main

raise SystemExit(main())
