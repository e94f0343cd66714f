/* A string -> int hash map (open addressing) used for value-name lookup. Keys are borrowed:
 * the map stores pointers to strings owned by the graph. */
#ifndef FR_NAME_MAP_H
#define FR_NAME_MAP_H

#include "graph/status.h"

typedef struct fr_name_map fr_name_map;

FR_NODISCARD fr_status fr_name_map_new(fr_name_map **out);
void fr_name_map_free(fr_name_map *m);
/* Insert or overwrite. The key pointer must outlive the entry. */
FR_NODISCARD fr_status fr_name_map_put(fr_name_map *m, const char *key, int value);
/* -1 when absent. */
int fr_name_map_get(const fr_name_map *m, const char *key);
void fr_name_map_clear(fr_name_map *m);

#endif
