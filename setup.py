"""Build the native cores (structspec/masks/_sweep.pyx, structspec/masks/_states.pyx,
structspec/ir/_suffix.pyx, structspec/ir/_byte_automata.pyx, structspec/tokens/_trie.pyx,
structspec/generation/_ngram.pyx, structspec/generation/_chain.pyx); everything else is in
pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("structspec.masks._sweep", ["structspec/masks/_sweep.pyx"], extra_compile_args=["-O3"]),
         Extension("structspec.masks._states", ["structspec/masks/_states.pyx"], extra_compile_args=["-O3"]),
         Extension("structspec.ir._suffix", ["structspec/ir/_suffix.pyx"], extra_compile_args=["-O3"]),
         Extension("structspec.ir._byte_automata", ["structspec/ir/_byte_automata.pyx"], extra_compile_args=["-O3"]),
         Extension("structspec.tokens._trie", ["structspec/tokens/_trie.pyx"], extra_compile_args=["-O3"]),
         Extension("structspec.generation._ngram", ["structspec/generation/_ngram.pyx"], extra_compile_args=["-O3"]),
         Extension("structspec.generation._chain", ["structspec/generation/_chain.pyx"], extra_compile_args=["-O3"])],
        compiler_directives={"language_level": 3},
    )
)
