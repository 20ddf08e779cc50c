# Sourced by the project's scripts: puts the Python that ci/setup installs into
# first on PATH, so meson, ninja and pytest are the ones it installed.
PYTHON=${PYTHON:-python3}
_scripts=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
case ":$PATH:" in *":$_scripts:"*) ;; *) PATH="$_scripts:$PATH" ;; esac
export PATH PYTHON
unset _scripts
# ccache caches a file compiled with a precompiled header (the core library's
# LibTorch headers, meson.build's cpp_pch) only with this sloppiness.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros}
