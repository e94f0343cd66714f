/* CRC-32C (Castagnoli), software slicing-by-8: checksums checkpoints. */
#ifndef FR_CRC32C_H
#define FR_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC: start with crc = 0 for a new stream. */
uint32_t fr_crc32c(uint32_t crc, const void *data, size_t n);

#endif
