from opencode_sandbox.cli.main import main

main()
