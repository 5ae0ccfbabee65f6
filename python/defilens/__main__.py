from ._cli import main

if __name__ == "__main__":  # `python -m defilens`; importing the module (docs tools do) runs nothing
    raise SystemExit(main())
