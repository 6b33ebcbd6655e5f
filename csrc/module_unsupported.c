/* pyrometer._core for an interpreter pyrometer cannot read: a free-threaded build,
 * or a CPython version with no frame layout file (see meson.build).  It compiles
 * against any CPython (public API only), so `pip install` never fails with a
 * compiler error, and importing it raises ImportError with one line that says
 * why; the CLI prints that line and exits 2.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static int refuse(PyObject *module)
{
    (void)module;
#ifdef Py_GIL_DISABLED
    PyErr_Format(PyExc_ImportError,
                 "pyrometer does not support free-threaded CPython yet (this is %d.%d.%d with the "
                 "GIL disabled); run it with a CPython %s built with the GIL",
                 PY_MAJOR_VERSION, PY_MINOR_VERSION, PY_MICRO_VERSION, PYROMETER_TESTED_VERSIONS);
#else
    PyErr_Format(PyExc_ImportError,
                 "pyrometer supports CPython %s; this is CPython %d.%d.%d (to try it anyway "
                 "where its frames are laid out as 3.14's and 3.15's: pip install "
                 "--config-settings=setup-args=-Dforce_version=true pyrometer, then pyrometer "
                 "--force-version)",
                 PYROMETER_TESTED_VERSIONS, PY_MAJOR_VERSION, PY_MINOR_VERSION, PY_MICRO_VERSION);
#endif
    return -1;
}

static PyModuleDef_Slot refusing_slots[] = {
    {Py_mod_exec, refuse},
#ifdef Py_mod_gil
    /* Importing this must not switch the GIL back on in a free-threaded build. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef refusing_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyrometer._core",
    .m_doc = "pyrometer's measuring core, absent: this interpreter is not supported.",
    .m_size = 0,
    .m_slots = refusing_slots,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&refusing_module);
}
