"""pyverbs loads on softverbs' libraries: every module imports, and they are really ours."""
import importlib
import importlib.machinery
import os
import pkgutil
import unittest

import base
import pyverbs

tearDownModule = base.tear_down_module


def mapped_files():
    """The files mapped into this process (/proc/self/maps)."""
    files = set()
    with open('/proc/self/maps') as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith('/'):
                files.add(parts[5].strip())
    return files


def pyverbs_modules():
    """Every module of the pyverbs package: pkgutil.walk_packages, plus the modules of the
    directories without __init__.py (pyverbs/providers/* are namespace packages, which
    walk_packages does not descend into)."""
    names = {m.name for m in pkgutil.walk_packages(pyverbs.__path__, 'pyverbs.')}
    suffixes = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)
    for top in pyverbs.__path__:
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d != '__pycache__']
            package = os.path.relpath(root, os.path.dirname(top)).replace(os.sep, '.')
            for f in files:
                for suffix in suffixes:
                    if f.endswith(suffix):
                        stem = f[:-len(suffix)]
                        if stem != '__init__':
                            names.add(f'{package}.{stem}')
                        break
    return sorted(names)


class ImportTest(unittest.TestCase):

    def test_every_pyverbs_module_imports(self):
        names = pyverbs_modules()
        # The provider modules are the ones linking libmlx5/libefa: they must be among them.
        for must in ('pyverbs.providers.mlx5.mlx5dv', 'pyverbs.providers.efa.efadv',
                     'pyverbs.device', 'pyverbs.qp', 'pyverbs.cmid'):
            self.assertIn(must, names)
        for name in names:
            with self.subTest(module=name):
                importlib.import_module(name)

    def assertOurs(self, soname):
        paths = [p for p in mapped_files() if os.path.basename(p).startswith(soname)]
        self.assertTrue(paths, f'{soname} is not loaded')
        for p in paths:
            self.assertEqual(os.path.dirname(os.path.realpath(p)), base.BUILD_LIB,
                             f'{soname} was loaded from {p}, not from {base.BUILD_LIB}')

    def test_libibverbs_is_ours(self):
        importlib.import_module('pyverbs.device')
        self.assertOurs('libibverbs.so')

    def test_provider_libraries_are_ours(self):
        for name in ('pyverbs.cmid', 'pyverbs.providers.efa.efadv',
                     'pyverbs.providers.mlx5.mlx5dv'):
            importlib.import_module(name)
        for soname in ('libibverbs.so', 'librdmacm.so', 'libmlx5.so', 'libefa.so'):
            with self.subTest(library=soname):
                self.assertOurs(soname)

    def test_a_fresh_process_imports_the_providers(self):
        # Imports in a clean interpreter, independent of what this process loaded before.
        code = ('import pyverbs.providers.mlx5.mlx5dv, pyverbs.providers.efa.efadv, '
                'pyverbs.cmid, pyverbs.device as d\n'
                'print([x.name.decode() for x in d.get_device_list()])')
        r = base.run_python(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "['softverbs0']")
        self.assertEqual(r.stderr, '')


if __name__ == '__main__':
    unittest.main()
