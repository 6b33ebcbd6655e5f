from pyrometer.early import main

raise SystemExit(main())
