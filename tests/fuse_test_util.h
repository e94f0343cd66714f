/* Shared by the fusion pass tests (tests/test_*_fuse.c): preparing a model for fixed input
 * shapes, running a hand-built graph before and after a pass, and training a fused model
 * against the unfused one. */
#ifndef FR_FUSE_TEST_UTIL_H
#define FR_FUSE_TEST_UTIL_H

#include "graph/ir.h"
#include "runtime/trainer.h"

/* Steps of the fused-vs-unfused training comparisons. */
#define FR_FT_STEPS 20

/* fr_prepare_forward with every graph input (up to 8) fed as [batch, seq]. */
fr_status fr_ft_prepare(fr_graph *g, int64_t batch, int64_t seq);

/* Runs g on the CPU with graph input vids[i] holding ins[i] (a constant for the run only);
 * returns a clone of value out's tensor. */
fr_tensor *fr_ft_run(fr_graph *g, int n_in, const int *vids, const fr_tensor *const *ins, int out);

/* Defaults with batch 2, seq 16, max lr 3e-3 (the caller sets precision and fusion). */
void fr_ft_train_options(fr_train_options *o);
/* FR_FT_STEPS training steps of a fresh trainer of g on a learnable token stream (vocab 64);
 * loss[k] per step; *n_attention (may be NULL): the report's fused blocks, -1 without one. */
void fr_ft_train_losses(const fr_graph *g, const fr_train_options *o, double *loss, int *n_attention);
/* Asserts the fused losses within tol relative of the plain ones, and that plain trains;
 * returns the worst relative difference. */
double fr_ft_expect_same_losses(const char *what, const double *fused, const double *plain, double tol);

#endif
