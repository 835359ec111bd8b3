"""No module of structspec imports one that imports it back (the layers contracts in
pyproject.toml order the packages; this checks every pair of modules, lazy imports included)."""

from __future__ import annotations

import grimp


def test_no_module_imports_one_that_imports_it_back():
    graph = grimp.build_graph("structspec", exclude_type_checking_imports=True)
    circles = [
        (module, *chain)
        for module in sorted(graph.modules)
        for imported in sorted(graph.find_modules_directly_imported_by(module))
        if (chain := graph.find_shortest_chain(importer=imported, imported=module))
    ]
    assert circles == []
