# make install PREFIX=/opt/sigmatop: a relocatable install (scripts/install.sh says what it does).
PREFIX ?= /usr/local

.PHONY: install
install:
	bash scripts/install.sh "$(PREFIX)"
