/* wr-regtool internals shared by its two files. */
#ifndef WARREN_TESTS_REGTOOL_H
#define WARREN_TESTS_REGTOOL_H

#include "image/registry.h"

extern struct wr_registry_opts g_opts;
int regtool_fail(wr_err e);
int regtool_open(const char *s, struct wr_registry **reg, struct wr_registry_ref *ref, wr_err *err);
int regtool_images(int argc, char **argv);

#endif
