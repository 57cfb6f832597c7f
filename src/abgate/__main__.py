from abgate.cli import main

main()
