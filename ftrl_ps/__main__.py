from ftrl_ps.cli import console_main

console_main()
