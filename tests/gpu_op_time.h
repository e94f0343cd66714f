/* Kernel timings for the GPU op tests: one node of a tnode (tests/op_harness.h) run on the
 * harness's device over device buffers, for the figures the programs print (never asserted). */
#ifndef FR_TESTS_GPU_OP_TIME_H
#define FR_TESTS_GPU_OP_TIME_H

#include "tests/op_harness.h"

/* ms per run of t's node (tn_init_domain'd with its attributes set; only its inputs' dtypes
 * and shapes are read, so the host tensors may hold no data): inputs and outputs are
 * allocated on the device from infer(), the inputs filled with the bytes 0x3c (0.0115 in
 * float32 and bfloat16), 2 warm-up runs then reps runs between two events. *bytes: the inputs'
 * and outputs' sizes (one read and one write each). -1 without a device (asserts on errors). */
double gpu_time_node(tnode *t, int reps, double *bytes);

/* A host tensor header of this dtype and shape without data (for gpu_time_node's tnode). */
fr_tensor gpu_shape_only(fr_dtype dt, int rank, const int64_t *dims);

#endif
