# Sourced by the project's scripts: puts the Python that ci/setup installs into
# first on PATH, so meson, ninja and pytest are the ones it installed.
PYTHON=${PYTHON:-python3}
_scripts=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
case ":$PATH:" in *":$_scripts:"*) ;; *) PATH="$_scripts:$PATH" ;; esac
export PATH PYTHON
unset _scripts
