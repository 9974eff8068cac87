from tailhound.cli import main

main()
