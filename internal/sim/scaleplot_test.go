package sim

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
)

// plotSeries is one line of the plot: throughput (y) against workers (x).
type plotSeries struct {
	name string
	x, y []float64
}

// writePlot draws the series on a log-scaled x axis (workers) and a linear
// y axis (tasks/s) as a PNG, with the standard library alone: lines,
// ticks, labels in a 5x7 pixel font, and a legend.
func writePlot(path string, series []plotSeries) error {
	const w, h, left, right, top, bottom = 900, 560, 90, 200, 40, 70
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill(img, img.Bounds(), color.White)
	ink := color.RGBA{40, 40, 40, 255}
	grid := color.RGBA{225, 225, 225, 255}

	ymax := 0.0
	for _, s := range series {
		for _, v := range s.y {
			ymax = math.Max(ymax, v)
		}
	}
	ymax = math.Max(ymax, 1)
	step := niceStep(ymax / 6)
	ymax = math.Ceil(ymax/step) * step
	xmin, xmax := math.Log10(5), math.Log10(2000)
	px := func(x float64) int { return left + int((math.Log10(x)-xmin)/(xmax-xmin)*float64(w-left-right)) }
	py := func(y float64) int { return h - bottom - int(y/ymax*float64(h-top-bottom)) }

	for y := 0.0; y <= ymax+step/2; y += step {
		line(img, left, py(y), w-right, py(y), grid)
		line(img, left-5, py(y), left, py(y), ink)
		label := fmt.Sprintf("%.0f", y)
		text(img, left-10-6*len(label), py(y)-3, label, ink)
	}
	for _, x := range []float64{10, 100, 1000} {
		line(img, px(x), top, px(x), h-bottom, grid)
		line(img, px(x), h-bottom, px(x), h-bottom+5, ink)
		label := fmt.Sprintf("%.0f", x)
		text(img, px(x)-3*len(label), h-bottom+12, label, ink)
	}
	line(img, left, top, left, h-bottom, ink)
	line(img, left, h-bottom, w-right, h-bottom, ink)
	text(img, (left+w-right)/2-60, h-bottom+35, "workers (log scale)", ink)
	text(img, 10, top-25, "tasks completed per second, shard count fixed (no reshard in the run)", ink)

	palette := []color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255}, {148, 103, 189, 255}}
	for i, s := range series {
		c := palette[i%len(palette)]
		for j := range s.x {
			x, y := px(s.x[j]), py(s.y[j])
			fill(img, image.Rect(x-3, y-3, x+4, y+4), c)
			if j > 0 {
				thick(img, px(s.x[j-1]), py(s.y[j-1]), x, y, c)
			}
		}
		ly := top + 20 + 22*i
		thick(img, w-right+20, ly, w-right+50, ly, c)
		text(img, w-right+58, ly-3, s.name, ink)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// niceStep rounds d up to 1, 2 or 5 times a power of ten.
func niceStep(d float64) float64 {
	if d <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(d)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= d {
			return m * p
		}
	}
	return 10 * p
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.Set(x, y, c)
		}
	}
}

// line draws from (x0, y0) to (x1, y1) (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	for d := -1; d <= 1; d++ {
		line(img, x0, y0+d, x1, y1+d, c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// text writes s in the 5x7 font, top-left at (x, y); unknown characters
// are left blank.
func text(img *image.RGBA, x, y int, s string, c color.Color) {
	for _, r := range s {
		if g, ok := glyphs[r]; ok {
			for row, bits := range g {
				for col, b := range bits {
					if b == '#' {
						img.Set(x+col, y+row, c)
					}
				}
			}
		}
		x += 6
	}
}

var glyphs = map[rune][7]string{
	'0':  {" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "},
	'1':  {"  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'2':  {" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"},
	'3':  {"#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "},
	'4':  {"   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "},
	'5':  {"#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "},
	'6':  {"  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "},
	'7':  {"#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "},
	'8':  {" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "},
	'9':  {" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "},
	'a':  {"     ", "     ", " ### ", "    #", " ####", "#   #", " ####"},
	'b':  {"#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#### "},
	'c':  {"     ", "     ", " ### ", "#    ", "#    ", "#   #", " ### "},
	'd':  {"    #", "    #", " ## #", "#  ##", "#   #", "#   #", " ####"},
	'e':  {"     ", "     ", " ### ", "#   #", "#####", "#    ", " ### "},
	'g':  {"     ", " ####", "#   #", "#   #", " ####", "    #", " ### "},
	'h':  {"#    ", "#    ", "# ## ", "##  #", "#   #", "#   #", "#   #"},
	'i':  {"  #  ", "     ", " ##  ", "  #  ", "  #  ", "  #  ", " ### "},
	'k':  {"#    ", "#    ", "#  # ", "# #  ", "##   ", "# #  ", "#  # "},
	'l':  {" ##  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'm':  {"     ", "     ", "## # ", "# # #", "# # #", "#   #", "#   #"},
	'n':  {"     ", "     ", "# ## ", "##  #", "#   #", "#   #", "#   #"},
	'o':  {"     ", "     ", " ### ", "#   #", "#   #", "#   #", " ### "},
	'p':  {"     ", "     ", "#### ", "#   #", "#### ", "#    ", "#    "},
	'r':  {"     ", "     ", "# ## ", "##  #", "#    ", "#    ", "#    "},
	's':  {"     ", "     ", " ### ", "#    ", " ### ", "    #", "#### "},
	't':  {" #   ", " #   ", "###  ", " #   ", " #   ", " #  #", "  ## "},
	'u':  {"     ", "     ", "#   #", "#   #", "#   #", "#  ##", " ## #"},
	'w':  {"     ", "     ", "#   #", "#   #", "# # #", "# # #", " # # "},
	'y':  {"     ", "     ", "#   #", "#   #", " ####", "    #", " ### "},
	'(':  {"   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "},
	')':  {" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "},
	',':  {"     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "},
	'/':  {"     ", "    #", "   # ", "  #  ", " #   ", "#    ", "     "},
	'\'': {"  #  ", "  #  ", " #   ", "     ", "     ", "     ", "     "},
	'-':  {"     ", "     ", "     ", "#####", "     ", "     ", "     "},
}
