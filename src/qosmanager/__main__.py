from qosmanager.cli import main

raise SystemExit(main())
