def load_bench_module(name: str):
    """bench/<name>.py as a module: bench/ is no package, so it is loaded by path and registered
    in sys.modules (dataclasses need it; the module puts bench/ on sys.path itself if it must)."""
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(f"bench_{name}", Path(__file__).resolve().parents[2] / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module

