from podway.cli.app import main

main()
