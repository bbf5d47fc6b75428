"""The emulated install's ``securec.h`` and ``libc_sec.so``: the bounds-checked C functions CANN ships.

CANN's headers include ``securec.h`` (hicann/hcomm include/hcomm_res_defs.h:18) and its libraries link
``c_sec``, openEuler's libboundscheck; the custom-operator samples call ``sprintf_s``, ``memcpy_s`` and
``strcpy_s`` (hicann/hccl examples/04_custom_ops_p2p/op_host/send.cc:27).  No distribution packages
libboundscheck (Debian has no such package, nor does PyPI), so the install carries this implementation of
the functions' documented contract: the return codes of libboundscheck's ``securec.h`` (``EOK``,
``EINVAL``, ``ERANGE``, the ``*_AND_RESET`` codes when the destination was cleared), a cleared destination
on every error, and ``-1`` from the ``printf`` family when the output does not fit.
"""
from __future__ import annotations

__all__ = ["SECUREC_H", "LIBC_SEC_C", "LIBC_SEC"]

LIBC_SEC = "libc_sec.so"

SECUREC_H = r"""/* securec.h of the hcomm_cffi emulated CANN install: the bounds-checked functions of CANN's libc_sec
 * (openEuler libboundscheck's contract), implemented by lib64/libc_sec.so.  Link with -lc_sec. */
#ifndef HCOMM_SIM_SECUREC_H
#define HCOMM_SIM_SECUREC_H
#include <stdarg.h>
#include <stddef.h>
#include <errno.h>

#ifndef EOK
#define EOK 0
#endif
#define EINVAL_AND_RESET (22 | 128)
#define ERANGE_AND_RESET (34 | 128)
#define EOVERLAP_AND_RESET (54 | 128)
#define SECUREC_STRING_MAX_LEN 0x7fffffffUL
#define SECUREC_MEM_MAX_LEN 0x7fffffffUL
typedef int errno_t;

#ifdef __cplusplus
extern "C" {
#endif
errno_t memcpy_s(void *dest, size_t destMax, const void *src, size_t count);
errno_t memmove_s(void *dest, size_t destMax, const void *src, size_t count);
errno_t memset_s(void *dest, size_t destMax, int c, size_t count);
errno_t strcpy_s(char *strDest, size_t destMax, const char *strSrc);
errno_t strncpy_s(char *strDest, size_t destMax, const char *strSrc, size_t count);
errno_t strcat_s(char *strDest, size_t destMax, const char *strSrc);
errno_t strncat_s(char *strDest, size_t destMax, const char *strSrc, size_t count);
int vsprintf_s(char *strDest, size_t destMax, const char *format, va_list argList);
int sprintf_s(char *strDest, size_t destMax, const char *format, ...);
int vsnprintf_s(char *strDest, size_t destMax, size_t count, const char *format, va_list argList);
int snprintf_s(char *strDest, size_t destMax, size_t count, const char *format, ...);
#ifdef __cplusplus
}
#endif
#endif
"""

LIBC_SEC_C = r"""/* libc_sec.so of the hcomm_cffi emulated CANN install (cannlib/securec.py). */
#include <stdio.h>
#include <string.h>
#include "securec.h"

static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = (const char *)a, *y = (const char *)b;
    return x < y + nb && y < x + na;
}

errno_t memcpy_s(void *dest, size_t destMax, const void *src, size_t count)
{
    if (destMax == 0 || destMax > SECUREC_MEM_MAX_LEN) return ERANGE;
    if (dest == NULL) return EINVAL;
    if (src == NULL) { memset(dest, 0, destMax); return EINVAL_AND_RESET; }
    if (count > destMax) { memset(dest, 0, destMax); return ERANGE_AND_RESET; }
    if (count == 0 || dest == src) return EOK;
    if (overlap(dest, count, src, count)) { memset(dest, 0, destMax); return EOVERLAP_AND_RESET; }
    memcpy(dest, src, count);
    return EOK;
}

errno_t memmove_s(void *dest, size_t destMax, const void *src, size_t count)
{
    if (destMax == 0 || destMax > SECUREC_MEM_MAX_LEN) return ERANGE;
    if (dest == NULL) return EINVAL;
    if (src == NULL) { memset(dest, 0, destMax); return EINVAL_AND_RESET; }
    if (count > destMax) { memset(dest, 0, destMax); return ERANGE_AND_RESET; }
    if (count) memmove(dest, src, count);
    return EOK;
}

errno_t memset_s(void *dest, size_t destMax, int c, size_t count)
{
    if (destMax == 0 || destMax > SECUREC_MEM_MAX_LEN) return ERANGE;
    if (dest == NULL) return EINVAL;
    if (count > destMax) { memset(dest, c, destMax); return ERANGE_AND_RESET; }
    memset(dest, c, count);
    return EOK;
}

static errno_t copy_string(char *strDest, size_t destMax, const char *strSrc, size_t count, size_t at)
{
    size_t n = strnlen(strSrc, count);
    if (at + n + 1 > destMax) { strDest[0] = '\0'; return ERANGE_AND_RESET; }
    if (overlap(strDest + at, n + 1, strSrc, n + 1)) { strDest[0] = '\0'; return EOVERLAP_AND_RESET; }
    memcpy(strDest + at, strSrc, n);
    strDest[at + n] = '\0';
    return EOK;
}

static errno_t check_string(char *strDest, size_t destMax, const char *strSrc)
{
    if (destMax == 0 || destMax > SECUREC_STRING_MAX_LEN) return ERANGE;
    if (strDest == NULL) return EINVAL;
    if (strSrc == NULL) { strDest[0] = '\0'; return EINVAL_AND_RESET; }
    return EOK;
}

errno_t strcpy_s(char *strDest, size_t destMax, const char *strSrc)
{
    errno_t rc = check_string(strDest, destMax, strSrc);
    return rc != EOK ? rc : copy_string(strDest, destMax, strSrc, SECUREC_STRING_MAX_LEN, 0);
}

errno_t strncpy_s(char *strDest, size_t destMax, const char *strSrc, size_t count)
{
    errno_t rc = check_string(strDest, destMax, strSrc);
    if (rc != EOK) return rc;
    if (count > SECUREC_STRING_MAX_LEN) { strDest[0] = '\0'; return ERANGE_AND_RESET; }
    return copy_string(strDest, destMax, strSrc, count, 0);
}

errno_t strcat_s(char *strDest, size_t destMax, const char *strSrc)
{
    errno_t rc = check_string(strDest, destMax, strSrc);
    size_t at;
    if (rc != EOK) return rc;
    at = strnlen(strDest, destMax);
    if (at == destMax) { strDest[0] = '\0'; return EINVAL_AND_RESET; }   /* no terminator within destMax */
    return copy_string(strDest, destMax, strSrc, SECUREC_STRING_MAX_LEN, at);
}

errno_t strncat_s(char *strDest, size_t destMax, const char *strSrc, size_t count)
{
    errno_t rc = check_string(strDest, destMax, strSrc);
    size_t at;
    if (rc != EOK) return rc;
    at = strnlen(strDest, destMax);
    if (at == destMax) { strDest[0] = '\0'; return EINVAL_AND_RESET; }
    return copy_string(strDest, destMax, strSrc, count, at);
}

int vsprintf_s(char *strDest, size_t destMax, const char *format, va_list argList)
{
    int n;
    if (strDest == NULL || format == NULL || destMax == 0 || destMax > SECUREC_STRING_MAX_LEN) {
        if (strDest != NULL && destMax > 0 && destMax <= SECUREC_STRING_MAX_LEN) strDest[0] = '\0';
        return -1;
    }
    n = vsnprintf(strDest, destMax, format, argList);
    if (n < 0 || (size_t)n >= destMax) { strDest[0] = '\0'; return -1; }
    return n;
}

int sprintf_s(char *strDest, size_t destMax, const char *format, ...)
{
    va_list ap;
    int n;
    va_start(ap, format);
    n = vsprintf_s(strDest, destMax, format, ap);
    va_end(ap);
    return n;
}

int vsnprintf_s(char *strDest, size_t destMax, size_t count, const char *format, va_list argList)
{
    int n;
    if (strDest == NULL || format == NULL || destMax == 0 || destMax > SECUREC_STRING_MAX_LEN ||
        (count > SECUREC_STRING_MAX_LEN - 1 && count != (size_t)-1)) {
        if (strDest != NULL && destMax > 0 && destMax <= SECUREC_STRING_MAX_LEN) strDest[0] = '\0';
        return -1;
    }
    if (count < destMax) {                     /* at most count characters; -1 when they were truncated */
        n = vsnprintf(strDest, count + 1, format, argList);
        if (n < 0) { strDest[0] = '\0'; return -1; }
        return (size_t)n > count ? -1 : n;
    }
    n = vsnprintf(strDest, destMax, format, argList);
    if (n < 0 || (size_t)n >= destMax) { strDest[0] = '\0'; return -1; }
    return n;
}

int snprintf_s(char *strDest, size_t destMax, size_t count, const char *format, ...)
{
    va_list ap;
    int n;
    va_start(ap, format);
    n = vsnprintf_s(strDest, destMax, count, format, ap);
    va_end(ap);
    return n;
}
"""
