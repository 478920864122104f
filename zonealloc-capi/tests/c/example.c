#include <stdio.h>
#include "zonealloc.h"

int main(void)
{
    struct zonealloc *za;
    uint64_t pfn;
    char text[1024];
    if (zonealloc_create_bytes(256ull << 20, ZONEALLOC_BACKING_FRAMES, &za) != ZONEALLOC_OK)
        return 1;
    int rc = zonealloc_alloc_pages(za, ZONEALLOC_GFP_KERNEL, 3, &pfn); /* 2^3 pages */
    if (rc != ZONEALLOC_OK) {
        fprintf(stderr, "alloc: %s\n", zonealloc_strerror(rc));
        return 1;
    }
    printf("8 pages at pfn %#llx\n", (unsigned long long)pfn);
    zonealloc_free_pages(za, pfn, 3);
    rc = zonealloc_free_pages(za, pfn, 3); /* a double free is refused */
    printf("second free: %s\n", zonealloc_strerror(rc));
    zonealloc_drain_all_pages(za, NULL);
    if (zonealloc_buddyinfo(za, text, sizeof text) >= 0)
        fputs(text, stdout);
    zonealloc_destroy(za);
    return rc == ZONEALLOC_ERR_FREE_ALREADY_FREE ? 0 : 1;
}
