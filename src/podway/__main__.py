from podway.cli import main

main()
