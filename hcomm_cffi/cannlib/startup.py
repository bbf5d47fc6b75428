"""The C that starts the emulated install's embedded interpreter, and the forwarders that wait for it.

Every function of the vendor-named libraries calls ``hcommsim_ensure_started()`` of the core
library before its first forward.  That function replaces cffi's own first-call start-up, which

* spins forever in a Python process that imported torch first (on Python < 3.12 cffi uses
  ``PyCapsule_Type.tp_version_tag`` as a spin lock and waits for 0; any attribute lookup on the
  capsule type sets it),
* starts whatever ``python3`` is first on PATH in a C program (``Py_InitializeEx`` derives the
  prefix from the program name), and
* makes every call return 0 (success) after a failed start.

Here the start is serialised by one mutex waited on with a timeout (with the GIL released), a
Python process starts cffi's module while holding the GIL after ``PyType_Modified`` has reset the
capsule tag (nothing else can set it then), a C program gets the interpreter of the Python that
built the install (its ``sys.executable``, so a virtualenv's packages too), and a failed start is
remembered with its cause: every call then returns an error code and ``aclGetRecentErrMsg()``
names the cause.
"""
from __future__ import annotations

import json
from typing import List

from .declarations import Prototype

__all__ = ["START_TIMEOUT_S", "core_preamble", "core_cdef", "forwarder_prelude", "forwarder", "failure_code"]

#: Longest wait for another thread's start of the interpreter (it imports numpy and the emulator).
START_TIMEOUT_S = 300

_HCCL_E_INTERNAL = 4
_ACL_ERROR_RT_INTERNAL_ERROR = 507000

#: C functions of the core that the init code calls through its own ``lib`` (not ``extern "Python"``).
core_cdef = """
void hcommsim_note_start_error(const char *message);
int hcommsim_started_interpreter(void);
"""


def _c_string(text: str) -> str:
    return json.dumps(text)        # a JSON string literal is a valid C string literal for these paths


def core_preamble(header_name: str, executable: str, base_prefix: str) -> str:
    """C source of the core library's start-up (placed after cffi's _embedding.h, so cffi_start_python is in scope)."""
    return f"""\
#include "{header_name}"
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HCOMMSIM_EXECUTABLE {_c_string(executable)}
#define HCOMMSIM_BASE_PREFIX {_c_string(base_prefix)}
#define HCOMMSIM_START_TIMEOUT_S {START_TIMEOUT_S}

static pthread_mutex_t hcommsim_start_lock;
static pthread_once_t hcommsim_start_once = PTHREAD_ONCE_INIT;
static volatile int hcommsim_state;            /* 0: not started, 1: running, -1: failed for good */
static int hcommsim_own_interpreter;           /* 1: this library started the interpreter (a C program) */
static char hcommsim_error[4096];

static void hcommsim_lock_init(void)
{{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);   /* the init code may call back */
    pthread_mutex_init(&hcommsim_start_lock, &attr);
    pthread_mutexattr_destroy(&attr);
}}

static void hcommsim_set_error(const char *fmt, ...)
{{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hcommsim_error, sizeof hcommsim_error, fmt, ap);
    va_end(ap);
}}

void hcommsim_note_start_error(const char *message)
{{
    hcommsim_set_error("%s", message);
}}

int hcommsim_started_interpreter(void)
{{
    return hcommsim_own_interpreter;
}}

/* A C program: start the interpreter of the Python that built the install, whatever python3 is on PATH. */
static int hcommsim_start_interpreter(void)
{{
    PyConfig config;
    PyStatus status;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;          /* as cffi's Py_InitializeEx(0): the program keeps its signals */
    config.parse_argv = 0;
    status = PyConfig_SetBytesString(&config, &config.program_name, HCOMMSIM_EXECUTABLE);
    if (!PyStatus_Exception(status))
        status = PyConfig_SetBytesString(&config, &config.executable, HCOMMSIM_EXECUTABLE);
    if (!PyStatus_Exception(status) && getenv("PYTHONHOME") != NULL)   /* another Python's home: not ours */
        status = PyConfig_SetBytesString(&config, &config.home, HCOMMSIM_BASE_PREFIX);
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {{
        hcommsim_set_error("the embedded Python interpreter (%s) did not start: %s%s%s", HCOMMSIM_EXECUTABLE,
                           status.func ? status.func : "", status.func ? ": " : "",
                           status.err_msg ? status.err_msg : "unknown error");
        return -1;
    }}
    hcommsim_own_interpreter = 1;
    PyEval_SaveThread();                           /* release the GIL: cffi takes it per call */
    return 0;
}}

/* After cffi's start failed: the cause, unless the init code recorded it (the module itself did not import). */
static void hcommsim_diagnose(void)
{{
    PyObject *module, *type, *value, *tb, *text;
    if (hcommsim_error[0] != 0)
        return;
    module = PyImport_ImportModule("_cffi_backend");
    if (module != NULL) {{
        Py_DECREF(module);
        hcommsim_set_error("the emulator's init code failed (its traceback is on stderr)");
        return;
    }}
    PyErr_Fetch(&type, &value, &tb);
    text = value != NULL ? PyObject_Str(value) : NULL;
    hcommsim_set_error("importing _cffi_backend failed: %s (the Python of this install, %s, needs cffi)",
                       text != NULL ? PyUnicode_AsUTF8(text) : "unknown error", HCOMMSIM_EXECUTABLE);
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}}

#if PY_VERSION_HEX < 0x030C0000
/* cffi's start-up lock is PyCapsule_Type.tp_version_tag and waits for 0.  Called with the GIL held:
   reset the tag (PyType_Modified) until it reads 0, dropping the GIL between tries, within the timeout. */
static int hcommsim_clear_capsule_tag(void)
{{
    struct timespec start, now, pause = {{0, 1000000}};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {{
        PyType_Modified(&PyCapsule_Type);
        if (PyCapsule_Type.tp_version_tag == 0)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > HCOMMSIM_START_TIMEOUT_S) {{
            hcommsim_set_error("PyCapsule_Type's version tag (cffi's start-up lock) stayed held for %d s by another "
                               "cffi-embedded library of this process", HCOMMSIM_START_TIMEOUT_S);
            return -1;
        }}
        Py_BEGIN_ALLOW_THREADS
        nanosleep(&pause, NULL);
        Py_END_ALLOW_THREADS
    }}
}}
#endif

static int hcommsim_start(void)
{{
    PyGILState_STATE gil;
    int rc;
    if (!Py_IsInitialized() && hcommsim_start_interpreter() != 0)   /* a C program */
        return -1;
    gil = PyGILState_Ensure();                     /* no other Python code runs from here */
#if PY_VERSION_HEX < 0x030C0000
    if (hcommsim_clear_capsule_tag() != 0) {{
        PyGILState_Release(gil);
        return -1;
    }}
#endif
    rc = cffi_start_python();
    if (rc != 0)
        hcommsim_diagnose();
    PyGILState_Release(gil);
    return rc;
}}

/* 0 when the emulator runs; otherwise -1 with the cause in hcommsim_start_error(), for good. */
int hcommsim_ensure_started(void)
{{
    struct timespec deadline;
    PyThreadState *saved = NULL;
    int rc;
    if (hcommsim_state != 0)
        return hcommsim_state > 0 ? 0 : -1;
    pthread_once(&hcommsim_start_once, hcommsim_lock_init);
    if (Py_IsInitialized() && PyGILState_Check())
        saved = PyEval_SaveThread();               /* wait without the GIL: the starting thread may need it */
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += HCOMMSIM_START_TIMEOUT_S;
    rc = pthread_mutex_timedlock(&hcommsim_start_lock, &deadline);
    if (saved != NULL)
        PyEval_RestoreThread(saved);
    if (rc != 0) {{
        hcommsim_set_error("another thread's start of the emulator did not finish within %d s (%s)",
                           HCOMMSIM_START_TIMEOUT_S, strerror(rc));
        return -1;
    }}
    if (hcommsim_state == 0) {{
        rc = hcommsim_start();
        if (rc != 0 && hcommsim_error[0] == 0)
            hcommsim_set_error("the emulator did not start (cffi's report is on stderr)");
        hcommsim_state = rc == 0 ? 1 : -1;
    }}
    pthread_mutex_unlock(&hcommsim_start_lock);
    return hcommsim_state > 0 ? 0 : -1;
}}

const char *hcommsim_start_error(void)
{{
    return hcommsim_error;
}}
"""


def failure_code(proto: Prototype) -> str:
    """What ``proto`` returns when the emulator cannot start (never its success value)."""
    if proto.ret == "aclError":
        return str(_ACL_ERROR_RT_INTERNAL_ERROR)
    if proto.ret.endswith("*"):
        return "hcommsim_start_error()" if proto.name in ("aclGetRecentErrMsg", "HcclGetErrorString") else "NULL"
    return f"({proto.ret}){_HCCL_E_INTERNAL}"


def forwarder_prelude(header_name: str) -> str:
    """The top of a vendor-named library's source: the start check every forwarder makes."""
    return f"""\
#include "{header_name}"
#include <stdio.h>

extern int hcommsim_ensure_started(void);
extern const char *hcommsim_start_error(void);
static volatile int hcommsim_running;

/* 1 when the emulator runs; else says on stderr why `function` fails (every call: the caller sees the cause). */
static int hcommsim_ready(const char *function, const char *code)
{{
    if (hcommsim_running)
        return 1;
    if (hcommsim_ensure_started() == 0) {{
        hcommsim_running = 1;
        return 1;
    }}
    fprintf(stderr, "hcomm_cffi emulator: %s returns %s: %s\\n", function, code, hcommsim_start_error());
    return 0;
}}
"""


def forwarder(proto: Prototype, params: str, call_args: str, core_name: str) -> List[str]:
    """The C lines of one vendor function: wait for the emulator, then forward to the core's ``core_name``."""
    code = failure_code(proto)
    said = "NULL" if code == "NULL" else ("the cause" if proto.ret.endswith("*") else code.split(")")[-1])
    return [f"extern {proto.declaration(core_name)}",
            f"{proto.ret} {proto.name}({params}) {{",
            f"    if (!hcommsim_ready({_c_string(proto.name)}, {_c_string(said)})) return {code};",
            f"    return {core_name}({call_args});",
            "}"]
