/* Shared by the fusion pass tests (tests/test_*_fuse.c): preparing a model for fixed input
 * shapes, running a hand-built graph before and after a pass, and training a fused model
 * against the unfused one. */
#ifndef FR_FUSE_TEST_UTIL_H
#define FR_FUSE_TEST_UTIL_H

#include "graph/ir.h"
#include "runtime/train/trainer.h"

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

/* Trains t[0..n) side by side for `steps` steps of k micro-batches of batch x (seq + 1) random
 * tokens below vocab (from the test generator named rng_name): asserts every trainer skips
 * what t[0] skips, and returns 1 when every step's loss, gradient norm and gradients and the
 * weights after the last step are t[0]'s bit for bit (rewrites that must change no number). */
int fr_ft_same_training(fr_trainer *const *t, int n, int64_t batch, int64_t seq, int64_t vocab, int k, int steps,
                        const char *rng_name);

/* ---- hand-built patterns ---- */

/* Adds pattern `kind` to g (its float inputs from fr_gc_add_input seeded by seed, so two
 * builds are equal); its last graph output is the pattern's result. */
typedef void (*fr_ft_build_fn)(fr_graph *g, uint64_t seed, int kind);
typedef fr_status (*fr_ft_pass_fn)(fr_graph *g, int *count);
/* Builds the pattern twice (a graph of `opset`), runs the pass on one: asserts it fused `want`
 * and that the output and the gradients of the inputs named wrt[0..n_wrt) (n_wrt <= 8) are
 * the unfused graph's within tol (relative L2), fresh random inputs. */
void fr_ft_check_pattern(fr_ft_build_fn build, int kind, int64_t opset, fr_ft_pass_fn pass, int want, int n_wrt,
                         const char *const *wrt, double tol);

/* ---- the dynamo exports of tests/fixtures/hf ---- */

/* Their parameters by name (the exporter's constants, tables and masks left out): what
 * fr_ft_freeze_constants keeps trained in a prepared graph. As `--train` it also selects a
 * dynamic export's RoPE inv_freq buffer, so the trainer's options leave it out (see below). */
#define FR_FT_HF_TRAIN "^(model|lm_head|transformer|bert|cls|gpt_neox|embed_out)\\."
/* Untrains the float initializers whose name does not match FR_FT_HF_TRAIN. */
void fr_ft_freeze_constants(fr_graph *g);
/* tests/fixtures/hf/DIR/model.onnx as imported (what the trainer takes). */
fr_graph *fr_ft_open_hf(const char *dir);
/* The trainer's defaults for those fixtures: batch 2 x seq 11 (their inputs' shape), the
 * parameters the exporter recorded trained (no --train, as the CLI). */
void fr_ft_hf_train_options(fr_train_options *o);
/* tests/fixtures/hf/DIR/model.onnx prepared for its [2, 11] inputs, constants frozen. */
fr_graph *fr_ft_load_hf(const char *dir);
/* g's first output (the logits) on DIR's inputs (a dynamic export's attention_mask too). */
fr_tensor *fr_ft_hf_logits(fr_graph *g, const char *dir);
/* Runs g on DIR's inputs; asserts its first output within 1e-4 (relative L2) of PyTorch's
 * logits. */
void fr_ft_expect_hf_logits(fr_graph *g, const char *dir);

#endif
