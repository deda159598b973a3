package main

import (
	"github.com/gin-gonic/gin"
	"golang.org/x/text/language"
)

func main() {
	_ = language.English
	gin.Default()
}
