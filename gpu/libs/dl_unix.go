//go:build darwin || freebsd || linux || netbsd

package libs

import "github.com/ebitengine/purego"

func dlopen(path string, global bool) (uintptr, error) {
	mode := purego.RTLD_NOW | purego.RTLD_LOCAL
	if global {
		mode = purego.RTLD_NOW | purego.RTLD_GLOBAL
	}
	return purego.Dlopen(path, mode)
}

func dlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }

func dlclose(h uintptr) { purego.Dlclose(h) }
